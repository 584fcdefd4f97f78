from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("inference", "0006_api_key")]

    operations = [
        migrations.AddField(
            "modelsettings", "kv_bits", models.PositiveSmallIntegerField(blank=True, null=True)
        ),
        migrations.AddField(
            "modelsettings", "kv_group_size", models.PositiveSmallIntegerField(blank=True, null=True)
        ),
    ]
